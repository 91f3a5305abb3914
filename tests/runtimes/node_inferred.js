// node_work.js run from a function that has only an inferred name (`runner.start`, from the
// assignment), as Node's own loader functions were written (`Module._load = function ...`).
const runner = {};
runner.start = function () {
  require("./node_work.js");
};
runner.start();
