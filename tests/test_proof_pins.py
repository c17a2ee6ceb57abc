"""Every section of the privacy proofs names the code it proves, pinned by a hash of its source:
a change to a proven function fails here until its section is re-read and the pin updated."""

from __future__ import annotations

from tests import proof_pins


def test_every_proof_section_is_pinned_to_unchanged_code():
    problems = proof_pins.stale()
    assert not problems, ("\n".join(problems)
                          + f"\n\nAfter re-reading each section above: {proof_pins.UPDATE}")


def test_a_changed_source_is_caught(tmp_path, monkeypatch):
    proof = tmp_path / "PROOF.md"
    name = "udfs.budget.split"
    proof.write_text(f"# P\n\n## 1. A section\nText.\nProves: {name} @ "
                     f"{proof_pins.source_hash(name)}\n\n## 2. Another\nNo pin here.\n")
    monkeypatch.setattr(proof_pins, "PROOFS", (proof,))
    assert proof_pins.stale() == [
        "PROOF.md section '2. Another': needs exactly one 'Proves: name @ hash; ...' line, has 0"]
    proof.write_text(proof.read_text().replace(proof_pins.source_hash(name), "0" * 12)
                     .replace("No pin here.\n", f"Proves: {name} @ {'0' * 12}\n"))
    stale = proof_pins.stale()
    assert len(stale) == 2 and all(proof_pins.UPDATE in s for s in stale)
    assert proof_pins.update() == 2 and proof_pins.stale() == []
