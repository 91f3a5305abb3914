"""HotSpot (Java) frames: the JVM's description of itself (vmstructs.py, jvm.py), the frame source
(source.py), names (names.py) and lines (lines.py) of its methods; the kernel half is bpf/hotspot.h."""
