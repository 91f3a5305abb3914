$stdout.sync = true

def hot_a(n)
  t = 0
  i = 0
  while i < n
    t = (t + i * i) % 1000003
    i += 1
  end
  t
end

def hot_b(n)
  t = 0
  i = 0
  while i < n
    t = (t + i * i) % 1000003
    i += 1
  end
  t
end

def work
  calls = [:hot_a, :hot_a, :hot_a, :hot_b]
  ready = false
  loop do
    calls.shuffle.each { |c| c == :hot_a ? hot_a(20000) : hot_b(20000) }
    unless ready
      puts "ready"
      ready = true
    end
  end
end

work
