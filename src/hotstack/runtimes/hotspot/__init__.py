"""HotSpot (Java) frames: the start of the frame source (issue 14). Today: the JVM's own description of
its structures (vmstructs.py), read from a live process; no kernel walker or naming yet."""
