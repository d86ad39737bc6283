"""The fault suite: each test injects one fault and ends with `rlm verify` passing and records unchanged.

Convention (docs/reliability.md is generated from it): every test here is marked ``faults`` and its
docstring's first line says, in one sentence, the fault injected and the outcome proven.
"""
