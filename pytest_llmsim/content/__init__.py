"""What the simulated model says: filler and echo, scripted replies and rules,
tool calls and JSON drawn from schemas, logprobs, embedding vectors.

Protocol-blind: every wire API renders what this package plans.
"""
