import sys

from minicb.cli import main

sys.exit(main())
