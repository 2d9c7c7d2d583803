import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests' helper modules (idx_files, slurmlab …)

from data_fixtures import fashion_root, mnist_root  # noqa: E402,F401  (shared data fixtures)
