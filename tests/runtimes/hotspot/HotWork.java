// A Java workload for tests/runtimes/test_hotspot.py: 8 threads, each spending ~75% of its CPU in
// heavy() and ~25% in light() (same loop, 3:1 iterations), called from work() called from run().
// Arguments: seconds [threads [tick_ms [busy_percent]]]. With tick_ms > 0 the main thread prints
// "tick WORK CPU_NS" every tick_ms (work() calls done so far and the CPU time of the worker threads:
// bench/java.py's throughput); with busy_percent < 100 each thread works that many ms every 100 ms
// and sleeps the rest (bench/agent.py's many JVMs). The lines marked `// line: WHAT` are the ground
// truth of the tests of lines: each hot loop is one line, each call one line.
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

public class HotWork implements Runnable {
    static volatile long sink;

    static long heavy(long x, int n) {
        x ^= n;  // (a line of its own before the loop: the frame's first bytecodes are not the loop's)
        for (int i = 0; i < n; i++) { x = x * 6364136223846793005L + 1442695040888963407L; x ^= x >>> 29; }  // line: heavy loop
        return x;
    }

    static long light(long x, int n) {
        x ^= n;  // (a line of its own before the loop: the frame's first bytecodes are not the loop's)
        for (int i = 0; i < n; i++) { x = x * 6364136223846793005L + 1442695040888963407L; x ^= x >>> 29; }  // line: light loop
        return x;
    }

    final long deadline;
    final int busyPercent;
    volatile long done;

    HotWork(long deadline, int busyPercent) {
        this.deadline = deadline;
        this.busyPercent = busyPercent;
    }

    long work(long x) {
        x = heavy(x, 30000);  // line: heavy call
        return light(x, 10000);  // line: light call
    }

    public void run() {
        long x = Thread.currentThread().getId();
        long period = System.nanoTime();
        while (System.nanoTime() < deadline) {
            x = work(x);  // line: work call
            done++;
            if (busyPercent < 100 && System.nanoTime() - period >= busyPercent * 1_000_000L) {
                try {
                    Thread.sleep(100 - busyPercent);
                } catch (InterruptedException e) {
                    break;
                }
                period = System.nanoTime();
            }
        }
        sink += x;
    }

    static String tick(HotWork[] works, Thread[] all, ThreadMXBean mx) {
        long work = 0, cpu = 0;
        for (int i = 0; i < all.length; i++) {
            work += works[i].done;
            cpu += Math.max(0, mx.getThreadCpuTime(all[i].getId()));
        }
        return "tick " + work + " " + cpu;
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(args[0]);
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 8;
        long tickMs = args.length > 2 ? Long.parseLong(args[2]) : 0;
        int busy = args.length > 3 ? Integer.parseInt(args[3]) : 100;
        Thread[] all = new Thread[threads];
        HotWork[] works = new HotWork[threads];
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        for (int i = 0; i < threads; i++) {
            works[i] = new HotWork(deadline, busy);
            all[i] = new Thread(works[i], "hot-" + i);
            all[i].start();
        }
        System.out.println("ready");
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        while (tickMs > 0 && System.nanoTime() < deadline) {
            Thread.sleep(tickMs);
            System.out.println(tick(works, all, mx));
        }
        for (Thread t : all) {
            t.join();
        }
        System.out.println("done " + sink);
    }
}
