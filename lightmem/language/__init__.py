"""The rule-based text rules the default read and write paths use (pure functions, no model): ``normalize`` (speakers
named, pronouns resolved, relative dates anchored), ``phatic`` (chit-chat removal and sentence units) and
``entities`` (named entities). Word splitting and stemming for the lexical index are ``lightmem.text``."""
