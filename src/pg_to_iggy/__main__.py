"""``python -m pg_to_iggy``: the pipeline job (see :mod:`pg_to_iggy.pipeline`)."""

import sys

from pg_to_iggy.pipeline import main

sys.exit(main())
