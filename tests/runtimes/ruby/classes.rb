# Frames with class names: an instance method, a module's method (included), a singleton method
# (def self.), a block in a method, nested names, C functions of a class and of a module:
#   <main> -> Runner#run -> Runner#step -> Shop::Basket#total -> Integer#times -> block in Shop::Basket#total
#                                            -> Spinner#spin -> Process.clock_gettime   (3 parts)
#                                       -> Shop::Basket.price -> Spinner#spin ...          (1 part)
# Prints one JSON line when it starts: its pid and the names Ruby's reflection gives each method
# (owner and singleton-ness, as Ruby 3.4's backtraces print them); runs for ARGV[0] seconds.
require "json"

PART = 0.004

module Spinner
  def spin(seconds)
    stop = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + seconds
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < stop
    x
  end
end

module Shop
  class Basket
    include Spinner

    def self.price(seconds)
      new.spin(seconds)
    end

    def total
      n = 0
      3.times { n += spin(PART) }
      n
    end
  end
end

class Runner
  def step
    Shop::Basket.new.total
    Shop::Basket.price(PART)
  end

  def run(seconds)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    step while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
  end
end

def qualified(m)
  owner = m.owner
  if owner.singleton_class?
    attached = ObjectSpace.each_object(Module).find { |c| c.singleton_class == owner }
    "#{attached.name}.#{m.name}"
  else
    "#{owner.name}##{m.name}"
  end
end

names = {
  "run" => qualified(Runner.instance_method(:run)), "step" => qualified(Runner.instance_method(:step)),
  "total" => qualified(Shop::Basket.instance_method(:total)), "price" => qualified(Shop::Basket.method(:price)),
  "spin" => qualified(Shop::Basket.instance_method(:spin)), "times" => qualified(3.method(:times)),
  "clock_gettime" => qualified(Process.method(:clock_gettime)), "lt" => qualified(1.0.method(:<)),
}
yjit = defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? true : false
$stdout.puts JSON.generate(pid: Process.pid, version: RUBY_VERSION, yjit: yjit, names: names)
$stdout.flush
Runner.new.run((ARGV[0] || 60).to_f)
