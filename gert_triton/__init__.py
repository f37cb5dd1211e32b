"""gert_triton: serve gert models through Triton Inference Server's Python backend (not built yet)."""
