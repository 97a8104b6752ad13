"""Reports over finished runs: ``comparison`` (runs over seeds, paired bootstrap), ``report`` (tables and plots of
one run), ``tables`` (the generated tables of the README and docs/), ``failures`` (which questions a run missed and
why) and ``offline_answers`` (scoring answers written elsewhere)."""
