// JNI workload for tests/runtimes/test_hotspot.py: Java calls spin() in a small C library (hotjni.c)
// from callNative(), and also burns CPU in Java (javaSide), about half each.
public class HotJni {
    static native long spin(long x, int n);

    static volatile long sink;

    static long javaSide(long x, int n) {
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long callNative(long x) {
        return spin(x, 20000);
    }

    public static void main(String[] args) throws Exception {
        System.load(args[1]);
        long deadline = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        System.out.println("ready");
        long x = 1;
        while (System.nanoTime() < deadline) {
            x = callNative(x);
            x = javaSide(x, 20000);
        }
        sink = x;
        System.out.println("done " + sink);
    }
}
