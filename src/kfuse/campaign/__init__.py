"""Property campaigns: random fusions run through kfuse and checked against the float64
reference, at scale (`kfuse campaign`, kfuse.cli.campaign).

kfuse.campaign.property holds the property itself (one example, three calls, every output
compared), which kfuse's own property tests check too; worker runs rounds of it with
Hypothesis in one process; runner fills the machine with workers and gathers their results;
repro writes a standalone script for each failure; summary holds the counts and the JSON.
"""
