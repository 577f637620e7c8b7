"""The fleet audit (``cudaopt audit``): many experiments measured, ranked by the estimated return
of optimising each, optionally optimised; its files (audit.json) and its page (audit.html)."""
