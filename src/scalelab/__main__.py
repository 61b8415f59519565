from scalelab.cli import main

raise SystemExit(main())
