from glm5svc.cli import main

raise SystemExit(main())
