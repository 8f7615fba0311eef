from draft_service.main import main

main()
