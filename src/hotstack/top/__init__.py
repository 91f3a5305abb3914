"""`hotstack top`: a live terminal view of the hottest functions, like `py-spy top` and `perf top`.

A front door: it runs the one Engine (sampling/), counts functions with profile/functions.py and
draws with rich; nothing here samples or symbolizes.
"""
