"""``python -m agentmesh_cli``: the ``agentmesh`` command."""

import sys

from agentmesh_cli.main import main

sys.exit(main())
