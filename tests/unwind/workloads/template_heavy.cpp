// A template-heavy C++ file (std::variant, std::regex, tuples, maps): compiling it takes clang++ -O2
// a few seconds through deep Sema recursion and LLVM's optimizer passes (some with frames over 32 KiB).
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>
#include <sstream>
#include <iostream>
using V = std::variant<int, double, std::string, std::vector<int>, std::map<std::string, int>>;
template <typename... F> struct overloaded : F... { using F::operator()...; };
template <typename... F> overloaded(F...) -> overloaded<F...>;
template <int N> struct Depth { static int get(int x) { return Depth<N - 1>::get(x) + x % (N + 1); } };
template <> struct Depth<0> { static int get(int x) { return x; } };
int run(const std::vector<V>& vs) {
  std::unordered_map<std::string, std::vector<std::tuple<int, double, std::string>>> index;
  int total = 0;
  for (const auto& v : vs)
    total += std::visit(overloaded{[](int i) { return i; }, [](double d) { return int(d); },
                                   [](const std::string& s) { return int(s.size()); },
                                   [](const std::vector<int>& x) { return int(x.size()); },
                                   [](const std::map<std::string, int>& m) { return int(m.size()); }}, v);
  std::regex re("([a-z]+)@([a-z]+)\\.(com|org)");
  std::smatch m;
  std::string text = "mail me at someone@example.org now";
  if (std::regex_search(text, m, re)) total += m.size();
  index["x"].emplace_back(1, 2.0, "three");
  std::sort(index["x"].begin(), index["x"].end());
  std::ostringstream os; os << total; std::cout << os.str();
  return total;
}
int main() { return run({V{1}, V{2.5}, V{std::string("a")}}); }
