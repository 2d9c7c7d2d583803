# nanoGPT's configurator in three lines (for chooses_by_device.py): --key=value overrides a global.
import sys
for _arg in sys.argv[1:]:
    _key, _value = _arg[2:].split("=", 1)
    globals()[_key] = _value
