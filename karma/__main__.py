"""`python -m karma ...` is the same as the `karma` command."""

import sys

from karma.cli.main import main

sys.exit(main())
