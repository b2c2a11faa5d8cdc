from mplint.cli import main

raise SystemExit(main())
