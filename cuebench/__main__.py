import sys

from cuebench_app.cli import main

sys.exit(main())
