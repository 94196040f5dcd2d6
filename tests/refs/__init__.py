"""Reference implementations the tests and benchmarks compare caten_lab against (llama.cpp via xllamacpp)."""
