public class Deep {
    static long rec(int n) { if (n == 0) { long x = 0; for (int i = 0; i < 1000; i++) x += i; return x; } return rec(n - 1) + 1; }
    public static void main(String[] a) { int d = Integer.parseInt(a[0]); long t = 0; while (true) t += rec(d); }
}
