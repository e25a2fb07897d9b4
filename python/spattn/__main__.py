"""`python -m spattn bench ...`: the command line's verbs (spattn._cli)."""
from ._cli import main

main()
