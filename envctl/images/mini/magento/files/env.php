<?php
// Deployment configuration, as in a real Magento install (app/etc/env.php). Read by bin/magento.
return [
    'backend' => ['frontName' => 'admin'],
    'db' => [
        'table_prefix' => '',
        'connection' => [
            'default' => [
                'host' => 'localhost',
                'dbname' => 'magentodb',
                'username' => 'magentouser',
                'password' => 'MyPassword',
                'active' => '1',
            ],
        ],
    ],
    'cache_dir' => 'var/cache',
    'MAGE_MODE' => 'production',
];
