# A Python function burns the CPU under -X perf: its name comes from the perf map (py::...).
def crunch_in_python(n):
    s = 0
    for i in range(n):
        s = (s * 31 + i) % 1000003
    return s


sink = 0
while True:
    sink += crunch_in_python(100000)
