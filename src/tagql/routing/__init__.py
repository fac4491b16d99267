"""Schema routing over many databases (DBCopilot): schema graph, synthetic questions, router."""
