"""The CUDA sources kfuse generates for a fixed corpus of fusions (tests/source_corpus.py)
are the ones stored with it. A change to the code generator or the heuristics that alters a
kernel fails here, naming the entries; if the change is meant, `python tests/source_corpus.py
--update` stores the new hashes (say in the commit what changed and why), and `--dump DIR` at
two commits gives the sources to diff."""

from __future__ import annotations

import source_corpus


def test_the_corpus_generates_the_stored_sources() -> None:
    entries = source_corpus.load()
    assert len(entries) > 300
    changed = []
    for entry in entries:
        schedulers, kernels = source_corpus.sources_of(entry)
        assert schedulers == entry["segments"], entry["name"]
        assert len(kernels) == entry["kernels"], entry["name"]
        if source_corpus.digest(schedulers, kernels) != entry["sha256"]:
            changed.append(entry["name"])
    assert not changed, f"{len(changed)} entries generate different sources: {changed[:20]}"


def test_a_changed_source_is_noticed() -> None:
    entry = source_corpus.load()[0]
    schedulers, kernels = source_corpus.sources_of(entry)
    name, source = kernels[0]
    edited = [(name, source.replace("{", "{ ", 1)), *kernels[1:]]
    assert source_corpus.digest(schedulers, edited) != entry["sha256"]
    assert source_corpus.digest(schedulers, kernels) == entry["sha256"]
