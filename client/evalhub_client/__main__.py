from evalhub_client.main import main

main()
