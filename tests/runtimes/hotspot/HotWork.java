// A Java workload for tests/runtimes/test_hotspot.py: 8 threads, each spending ~75% of its CPU in
// heavy() and ~25% in light() (same loop, 3:1 iterations), called from work() called from run().
public class HotWork implements Runnable {
    static volatile long sink;

    static long heavy(long x, int n) {
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long light(long x, int n) {
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    final long deadline;

    HotWork(long deadline) {
        this.deadline = deadline;
    }

    long work(long x) {
        x = heavy(x, 30000);
        return light(x, 10000);
    }

    public void run() {
        long x = Thread.currentThread().getId();
        while (System.nanoTime() < deadline) {
            x = work(x);
        }
        sink += x;
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 8;
        Thread[] all = new Thread[threads];
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        for (int i = 0; i < threads; i++) {
            all[i] = new Thread(new HotWork(deadline), "hot-" + i);
            all[i].start();
        }
        System.out.println("ready");
        for (Thread t : all) {
            t.join();
        }
        System.out.println("done " + sink);
    }
}
