# Two hot methods in a 75/25 split of this thread's CPU time, under a deeper call chain:
#   <main> -> Workload#run -> Workload#step -> Workload#hot_a (3 parts) | Workload#hot_b (1 part)
# Each part burns PART of thread CPU time (not wall time), so the split holds on a busy machine.
# Prints one JSON line when it starts; runs for ARGV[0] seconds (default 60).
require "json"

PART = 0.004

class Workload
  def burn(seconds)
    stop = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < stop
    x
  end

  def hot_a
    burn(3 * PART)
  end

  def hot_b
    burn(PART)
  end

  def step
    hot_a
    hot_b
  end

  def run(seconds)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    step while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
  end
end

$stdout.puts JSON.generate(pid: Process.pid, version: RUBY_VERSION)
$stdout.flush
Workload.new.run((ARGV[0] || 60).to_f)
