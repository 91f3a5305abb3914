import random
import sys


def hot_a(n):
    t = 0
    for i in range(n):
        t = (t + i * i) % 1000003
    return t


def hot_b(n):
    t = 0
    for i in range(n):
        t = (t + i * i) % 1000003
    return t


def work():
    calls = [hot_a, hot_a, hot_a, hot_b]
    ready = False
    while True:
        random.shuffle(calls)
        for call in calls:
            call(20000)
        if not ready:
            print("ready", flush=True)
            ready = True


work()
