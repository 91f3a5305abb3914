// A generic function in a module burns the CPU: its demangled name must show (legacy and v0).
mod engine {
    #[inline(never)]
    pub fn crunch<T: Copy + Into<f64>>(n: T) -> f64 {
        let mut s = 0.0f64;
        for i in 0..50_000_000u64 {
            s = s * 0.999 + n.into() + (i & 1) as f64;
        }
        s
    }
}

fn main() {
    let mut sink = 0.0;
    loop {
        sink += engine::crunch(std::hint::black_box(1.5f32));
        std::hint::black_box(sink);
    }
}
