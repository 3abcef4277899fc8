import sys

from cuebench.cli import main

sys.exit(main())
