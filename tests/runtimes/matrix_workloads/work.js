function hot_a(n) {
  let t = 0;
  for (let i = 0; i < n; i++) t = (t + i * i) % 1000003;
  return t;
}

function hot_b(n) {
  let t = 0;
  for (let i = 0; i < n; i++) t = (t + i * i) % 1000003;
  return t;
}

function work() {
  const calls = [hot_a, hot_a, hot_a, hot_b];
  let ready = false, sum = 0;
  for (;;) {
    for (let i = calls.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      const c = calls[i]; calls[i] = calls[j]; calls[j] = c;
    }
    for (const call of calls) sum += call(400000);
    if (!ready) { console.log("ready"); ready = true; }
  }
}

work();
