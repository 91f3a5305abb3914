// A JIT-compiled Java method burns the CPU: its name comes from the perf map (jcmd Compiler.perfmap).
public class HotJava {
    static long crunchInJava(long n) {
        long s = 0;
        for (long i = 0; i < n; i++) s = (s * 31 + i) % 1000003;
        return s;
    }

    public static void main(String[] args) {
        long sink = 0;
        for (;;) sink += crunchInJava(10_000_000L);
    }
}
