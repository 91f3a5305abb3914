// Two hot functions, 75/25 of the time: `optimized` (arithmetic: TurboFan-compiled) and `parsing`
// (JSON.parse: a builtin in C++). argv[2]: seconds to run.
const seconds = Number(process.argv[2] || 10);
const text = JSON.stringify({a: [1, 2, 3, {b: "x".repeat(50)}], c: {d: 1.5, e: [true, false, null]}});

function optimized(ms) {
  const end = Date.now() + ms;
  let x = 0;
  while (Date.now() < end) {
    for (let i = 0; i < 20000; i++) x = (x * 31 + i) % 1000003;
  }
  return x;
}

function parsing(ms) {
  const end = Date.now() + ms;
  let n = 0;
  while (Date.now() < end) {
    for (let i = 0; i < 50; i++) n += JSON.parse(text).a.length;
  }
  return n;
}

function main() {
  const stop = Date.now() + seconds * 1000;
  console.log("ready");
  while (Date.now() < stop) {
    optimized(30);
    parsing(10);
  }
}
main();
