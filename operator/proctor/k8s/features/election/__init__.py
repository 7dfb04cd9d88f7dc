"""Leader election (`proctor operator --leader-election`): the Lease rules (pure) and the shell."""
