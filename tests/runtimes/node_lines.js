// A hot loop in a function whose body spans several lines: the lines of `hot`'s loop
// (tests/runtimes/test_node_lines.py reads them from this file by their markers) get its samples,
// never its first line. argv[2]: seconds to run. Prints "ready" once running.
function hot(ms) {
  const end = Date.now() + ms;
  let x = 0;
  while (Date.now() < end) {                 // loop: first
    for (let i = 0; i < 20000; i++) {
      x = (x * 31 + i) % 1000003;
    }
  }                                          // loop: last
  return x;
}

const stop = Date.now() + Number(process.argv[2] || 10) * 1000;
console.log("ready");
while (Date.now() < stop) hot(50);
