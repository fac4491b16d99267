"""HTTP service (FastAPI) over the pipeline."""
