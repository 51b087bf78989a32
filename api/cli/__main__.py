from api.cli import main

raise SystemExit(main())
