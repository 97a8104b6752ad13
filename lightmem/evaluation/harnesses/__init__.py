"""The benchmark harnesses: ``system`` (what a system under test offers), ``locomo`` and ``longmemeval`` (recall and
QA on each benchmark), ``qa`` (answering and judging, shared by both), ``packed`` (what a packed prompt holds),
``baselines`` (the systems lightmem is compared with) and ``inject`` (stress-test noise)."""
