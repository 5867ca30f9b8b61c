## GitLab configuration settings (envctl mini flavor)
## Only external_url and puma['worker_processes'] are honoured; other settings are accepted and ignored.
## Apply changes with: gitlab-ctl reconfigure

external_url 'http://metis.lti.cs.cmu.edu:8023'
