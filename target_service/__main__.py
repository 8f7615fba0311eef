from target_service.main import main

main()
