import os

# Tests build many throwaway models in temporary directories: without this, every one of them would
# leave a prepared-weights entry (up to ~100 MB) in the developer's cache dir. The cache's own tests
# (tests/models/test_prepared_weights.py) turn it back on in a temporary cache dir.
os.environ.setdefault("CATEN_WEIGHT_CACHE", "0")
