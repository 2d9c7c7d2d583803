# Render one of the OnDemand app's ERB files (ondemand/ddp_tutorial/) as OnDemand does, for
# tests/test_lab_job.py:
#
#   ruby tests/helpers/ood_render.rb FILE.erb '{"ddp_lang": "tr", ...}'   # the result on stdout
#
# The form's values are reachable both ways OnDemand offers them: as `context.NAME` (the template/
# scripts) and as bare `NAME` (submit.yml.erb); ERB's trim mode "-", as OnDemand uses it.
require "erb"
require "json"

class FormContext
  def initialize(values)
    @values = values
  end

  def context
    self
  end

  def method_missing(name, *args)
    return @values[name.to_s] if @values.key?(name.to_s)
    super
  end

  def respond_to_missing?(name, include_private = false)
    @values.key?(name.to_s) || super
  end

  def render(text)
    ERB.new(text, trim_mode: "-").result(binding)
  end
end

# A template that refuses a value raises; OnDemand shows the error's message on the form's page: so here,
# that one line on stderr and exit 1.
begin
  print FormContext.new(JSON.parse(ARGV[1])).render(File.read(ARGV[0]))
rescue StandardError => e
  warn "#{e.class}: #{e.message}"
  exit 1
end
