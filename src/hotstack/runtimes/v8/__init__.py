"""V8 (Node.js) frames: JavaScript functions named from the outside, with nothing in the target.

The kernel half (bpf/v8.h) records, for each frame the in-kernel unwinder walks with frame
pointers in a `node` process, the JSFunction and context words below its frame pointer, and what
gives its line (its pc, its bytecode slots, the leaf's bytecode offset register and stack top).
Here: metadata.py reads V8's post-mortem metadata (the `v8dbg_*` symbols of the binary), heap.py
reads V8 objects from the target's memory to name a function `name (script:line)`, positions.py
finds the line it executes through V8's source position tables, and source.py is the frame
source (runtimes/registry.py) that ties them to the engine.
"""
