"""V8 (Node.js) frames: JavaScript functions named from the outside, with nothing in the target.

The kernel half (bpf/v8.h) records, for each frame the in-kernel unwinder walks with frame
pointers in a `node` process, the JSFunction and context words below its frame pointer. Here:
metadata.py reads V8's post-mortem metadata (the `v8dbg_*` symbols of the binary), heap.py
reads V8 objects from the target's memory to name a function `name (script:line)`, and
source.py is the frame source (runtimes/registry.py) that ties them to the engine.
"""
