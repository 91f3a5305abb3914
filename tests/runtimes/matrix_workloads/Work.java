import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

public class Work {
    static long hot_a(int n) {
        long t = 0;
        for (int i = 0; i < n; i++) t = (t + (long) i * i) % 1000003;
        return t;
    }

    static long hot_b(int n) {
        long t = 0;
        for (int i = 0; i < n; i++) t = (t + (long) i * i) % 1000003;
        return t;
    }

    static void work() {
        List<Integer> calls = new ArrayList<>(java.util.Arrays.asList(0, 0, 0, 1));
        boolean ready = false;
        long sum = 0;
        while (true) {
            Collections.shuffle(calls);
            for (int c : calls) sum += c == 0 ? hot_a(400000) : hot_b(400000);
            if (!ready) { System.out.println("ready " + sum); ready = true; }
        }
    }

    public static void main(String[] args) {
        work();
    }
}
