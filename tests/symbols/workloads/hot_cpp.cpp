// A templated member function in a namespace burns the CPU: its demangled name must show.
#include <cstdio>

namespace app {
template <typename T>
struct Worker {
    __attribute__((noinline)) T spin(T n) {
        T s = 0;
        for (long i = 0; i < 50000000; i++) s = s * static_cast<T>(0.999) + n;
        return s;
    }
};
}  // namespace app

int main() {
    app::Worker<double> w;
    volatile double sink = 0;
    for (;;) sink = w.spin(sink * 1e-9 + 1.5);  // reads the volatile: the call stays in the loop
}
