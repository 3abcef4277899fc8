import sys

from cuebench.app.cli import main

sys.exit(main())
