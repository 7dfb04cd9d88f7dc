"""`python -m proctor.agents serve --kind …`: a reference agent, without the rest of the CLI."""

import sys

from proctor.agents.cli import main

sys.exit(main())
