from warden.node.main import main

raise SystemExit(main())
